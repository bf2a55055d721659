"""hpckit.bench"""
