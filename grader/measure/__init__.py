"""Measurement on the host: acceptance decisions, roofline floors and profiles, device peaks."""
