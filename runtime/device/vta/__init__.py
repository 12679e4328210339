"""runtime/device/vta"""
