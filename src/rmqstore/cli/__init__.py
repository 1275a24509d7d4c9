"""The ``rmqstore`` command line (click + rich). Imported only by the console script."""
