"""What announces the daemon to the home: Home Assistant discovery and zeroconf."""
