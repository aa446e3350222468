"""appliance: a local research appliance (question in, cited and fact-checked report out)."""

__version__ = "0.1.0"
