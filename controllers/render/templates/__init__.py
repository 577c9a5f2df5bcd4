"""Jinja2 templates of the operand objects (package data read by `controllers.render`)."""
