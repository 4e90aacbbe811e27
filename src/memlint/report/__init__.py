"""Rendering at the edge: tables (rich) and JSON. The core never prints."""
