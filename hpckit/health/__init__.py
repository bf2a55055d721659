"""hpckit.health"""
