/* config_values.h — the values of the model file's four configs. */
#ifndef LX_CONFIG_VALUES_H
#define LX_CONFIG_VALUES_H

#include "ir.h"

/* Checks every config number against its range where it was written (or on
 * the command line), applies the defaults, resolves an open plan (an open
 * field counts as 1 from here on, lx_ir.open_plan says which were open) and
 * checks the relations between fields. Returns the number of errors, each
 * reported at its field. */
int lx_check_config_values(lx_ir *ir);

#endif
