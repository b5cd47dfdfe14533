"""What is served: health, metrics, explain and the dashboard, and who may read what."""
