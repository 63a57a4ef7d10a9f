"""``blobkit mcp``: a kit's world served over the Model Context Protocol, one isolated episode per session, judged
as ``blobkit eval --trajectories`` judges a recorded conversation."""
