"""Text for people, one module per command; each function writes to a
stream it is given (the command passes sys.stdout)."""
