"""The blueprint: an admin's description of a cluster, as a typed and validated model."""
