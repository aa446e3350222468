"""appliance: a local research appliance (question in, cited and fact-checked report out)."""

import os

__version__ = "0.1.0"

# LanceDB's native layer logs routine notes ("No existing dataset ... will be created") to
# stderr; keep stderr for our progress and errors unless the user asks for them.
os.environ.setdefault("LANCEDB_LOG", "error")
