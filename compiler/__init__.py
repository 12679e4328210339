"""compiler: tensor expressions (te), schedules (schedule) and the loop IR (tir); more to come.

See docs/tensor_expressions.md for the operator layer's user guide.
"""
