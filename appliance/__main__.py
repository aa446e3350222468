"""`python -m appliance` is the `appliance` command."""

from .cli import main

main(prog_name="appliance")
