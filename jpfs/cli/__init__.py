"""The typer CLI: parses arguments and calls the core. No logic lives here."""
