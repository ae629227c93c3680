/* included by tests/diag/syntax_error_in_header.model */
static const int broken = ;
