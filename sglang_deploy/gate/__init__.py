"""The post-deploy gate: is the server ready, configured as planned, and fast enough?"""
