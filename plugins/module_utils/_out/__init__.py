# Copyright: gpusplit contributors
# Apache-2.0
"""Writing a run's output files on the controller, one step for them all. Private to the collection."""
