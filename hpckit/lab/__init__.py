"""hpckit.lab"""
