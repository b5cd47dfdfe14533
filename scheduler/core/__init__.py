"""The scheduling cycle: take a pod, snapshot, filter and score through the profile's plugins, reserve, and
hand the decision on. Orchestration only."""
