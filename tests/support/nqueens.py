"""The independent truth for the N-queens solver."""

# OEIS A000170 (https://oeis.org/A000170), N = 1..16: solutions of N queens.
A000170 = [1, 0, 0, 2, 10, 4, 40, 92, 352, 724, 2680, 14200, 73712, 365596, 2279184, 14772512]
