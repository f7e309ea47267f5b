"""End-to-end stories: a newcomer's first hour, the guide's commands, the seed workloads, as a user
meets them.
"""
