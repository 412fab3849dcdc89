"""One module per verb (or verb group); each registers itself on the app in main.py."""
