/* The C API from C: workspace query, align, error text. Exits 0 on success, 77 without a usable backend. */
#include <stdio.h>

#include <moe/routing.h>

int main(void) {
  if (moe_backend_check() != MOE_SUCCESS) {
    printf("skipped: %s\n", moe_last_error());
    return 77;
  }
  size_t ws = 0;
  if (moe_align_workspace_size(8, 4, 4, &ws) != MOE_SUCCESS) return 1;
  /* a bad call returns a status and a text naming the argument */
  moe_status_t st = moe_align_block_size(NULL, MOE_INT32, 8, 0, 4, NULL, NULL, NULL, NULL, 0, NULL);
  printf("backend %s, workspace %zu bytes; bad call: %s (%s)\n", moe_backend_name(), ws, moe_status_string(st),
         moe_last_error());
  return st == MOE_ERROR_INVALID_ARGUMENT ? 0 : 1;
}
