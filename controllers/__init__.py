"""The GPU operator's controllers and the pure renderer they share."""
