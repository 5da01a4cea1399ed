# Copyright: gpusplit contributors
# Apache-2.0
"""The roles' steps on the controller (plugins/plugin_utils/role_steps.py). Private to the collection."""
