"""The basics every other type is made of: quantities, resource vectors, field paths, the one documented error
type."""
