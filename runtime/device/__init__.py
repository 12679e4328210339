"""runtime/device"""
