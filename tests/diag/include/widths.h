/* included by tests/diag/macro_from_header_*.model */
#define WIDE (1 << 18)
#define NOT_A_NUMBER (0.0 / 0.0)
