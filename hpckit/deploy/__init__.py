"""hpckit.deploy"""
