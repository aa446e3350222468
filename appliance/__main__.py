"""`python -m appliance` is the `appliance` command."""

from .cli import main

if __name__ == "__main__":   # a worker process started by `serve` imports this module too
    main(prog_name="appliance")
