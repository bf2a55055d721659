"""hpckit.results"""
