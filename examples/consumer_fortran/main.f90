! A Fortran-only program: the contract's example through moe_align_block_size, then moe_sum, both checked.
! Exit code 0: right answers; 77: no usable backend here (e.g. no GPU); 1: wrong.
program consumer_fortran
  use, intrinsic :: iso_c_binding
  use moe_routing
  implicit none
  integer(c_int32_t), target :: ids(9) = [0, 1, 2, 1, 2, 3, 0, 3, 4]
  integer(c_int32_t), target :: sorted(24), experts(6), post(1)
  integer(c_int32_t) :: want(20) = [0, 6, 9, 9, 1, 3, 9, 9, 2, 4, 9, 9, 5, 7, 9, 9, 8, 9, 9, 9]
  real(c_float), target :: x(8) = [1, 2, 3, 4, 5, 6, 7, 8], y(4)
  type(c_ptr) :: d_ids, d_sorted, d_experts, d_post, d_ws, d_x, d_y
  integer(c_size_t) :: ws
  integer(c_int) :: st

  if (moe_backend_check() /= MOE_SUCCESS) stop 77
  st = moe_align_workspace_size(9_c_int64_t, 5_c_int32_t, 4_c_int32_t, ws)
  st = ior(st, moe_malloc(d_ids, 36_c_size_t))
  st = ior(st, moe_malloc(d_sorted, 96_c_size_t))
  st = ior(st, moe_malloc(d_experts, 24_c_size_t))
  st = ior(st, moe_malloc(d_post, 4_c_size_t))
  st = ior(st, moe_malloc(d_ws, ws))
  st = ior(st, moe_memcpy_to_device(d_ids, c_loc(ids), 36_c_size_t))
  st = ior(st, moe_align_block_size(d_ids, MOE_INT32, 9_c_int64_t, 5_c_int32_t, 4_c_int32_t, d_sorted, &
                                    d_experts, d_post, d_ws, ws, c_null_ptr))
  st = ior(st, moe_synchronize(c_null_ptr))
  st = ior(st, moe_memcpy_to_host(c_loc(sorted), d_sorted, 96_c_size_t))
  st = ior(st, moe_memcpy_to_host(c_loc(experts), d_experts, 24_c_size_t))
  st = ior(st, moe_memcpy_to_host(c_loc(post), d_post, 4_c_size_t))
  st = ior(st, moe_malloc(d_x, 32_c_size_t))
  st = ior(st, moe_malloc(d_y, 16_c_size_t))
  st = ior(st, moe_memcpy_to_device(d_x, c_loc(x), 32_c_size_t))
  st = ior(st, moe_sum(d_x, MOE_FLOAT32, 2_c_int64_t, 2_c_int32_t, 2_c_int64_t, d_y, c_null_ptr))
  st = ior(st, moe_synchronize(c_null_ptr))
  st = ior(st, moe_memcpy_to_host(c_loc(y), d_y, 16_c_size_t))
  st = ior(st, moe_free(d_ids))
  st = ior(st, moe_free(d_sorted))
  st = ior(st, moe_free(d_experts))
  st = ior(st, moe_free(d_post))
  st = ior(st, moe_free(d_ws))
  st = ior(st, moe_free(d_y))
  if (st /= MOE_SUCCESS) stop 1
  if (post(1) /= 20 .or. any(sorted(1:20) /= want) .or. any(sorted(21:24) /= 9)) stop 1
  if (any(experts /= [0, 1, 2, 3, 4, -1])) stop 1
  if (any(y /= [4.0, 6.0, 12.0, 14.0])) stop 1
  ! a bad call (output overlapping input): a status, not a crash
  if (moe_sum(d_x, MOE_FLOAT32, 2_c_int64_t, 2_c_int32_t, 2_c_int64_t, d_x, c_null_ptr) /= &
      MOE_ERROR_INVALID_ARGUMENT) stop 1
  if (moe_free(d_x) /= MOE_SUCCESS) stop 1
  print '(a)', 'consumer_fortran: ok'
end program
