"""Wrong: the sum is right, but it is accumulated into the input A (a real input)."""


def custom_kernel(data):
    a, b, c = data
    a.add_(b)
    c.copy_(a)
    return c
