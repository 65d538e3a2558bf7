"""Jobs: registration (plan), start, stop, and their state."""
