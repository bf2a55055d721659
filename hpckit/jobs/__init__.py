"""hpckit.jobs"""
