"""Example job scripts the templates can run (standalone: each needs only its own imports)."""
