"""The extension points (as Protocols), the Status type, the per-cycle state and profiles."""
