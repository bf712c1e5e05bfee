"""`python -m horovodlite.bench`: one report comparing horovodlite with its peers.
See __main__.py for the command line."""
