// sp_torch.cpp -- the torch layer as one translation unit: its parts are
// included in their dependency order (see sp_torch_internal.h), so that the
// encoder's and sync mode's functions inline into the fallback as they
// would within one file. The module is built from this file.
#define SP_TORCH_AMALGAMATION
#include "torch/sp_torch_internal.h"

#include "sp_encode.cpp"
#include "sp_sync.cpp"
#include "sp_fallback.cpp"
