! The contract's align_block_size_ep example through the Fortran interface module, on the configured backend.
! Exit code 0: right answer; 77: no usable backend here (skipped); 1: wrong.
program fortran_align_ep
  use, intrinsic :: iso_c_binding
  use moe_routing
  implicit none
  integer(c_int32_t), target :: ids(8) = [4, 1, 6, 4, 0, 7, 5, 6]
  integer(c_int32_t), target :: map(8) = [-1, -1, -1, -1, 0, 1, 2, 3]
  integer(c_int32_t), target :: sorted(12), experts(6), post(1), counts(4), positions(8)
  integer(c_int32_t) :: want(12) = [0, 3, 6, 8, 2, 7, 5, 8, 8, 8, 8, 8]
  type(c_ptr) :: d_ids, d_map, d_sorted, d_experts, d_post, d_counts, d_positions, d_ws
  integer(c_size_t) :: ws
  integer(c_int) :: st

  if (moe_backend_check() /= MOE_SUCCESS) stop 77
  if (moe_align_max_padded(8_c_int64_t, 4_c_int32_t, 2_c_int32_t) /= 12) stop 1
  st = moe_align_workspace_size_ep(8_c_int64_t, 8_c_int32_t, 4_c_int32_t, 2_c_int32_t, ws)
  st = ior(st, moe_malloc(d_ids, 32_c_size_t))
  st = ior(st, moe_malloc(d_map, 32_c_size_t))
  st = ior(st, moe_malloc(d_sorted, 48_c_size_t))
  st = ior(st, moe_malloc(d_experts, 24_c_size_t))
  st = ior(st, moe_malloc(d_post, 4_c_size_t))
  st = ior(st, moe_malloc(d_counts, 16_c_size_t))
  st = ior(st, moe_malloc(d_positions, 32_c_size_t))
  st = ior(st, moe_malloc(d_ws, ws))
  st = ior(st, moe_memcpy_to_device(d_ids, c_loc(ids), 32_c_size_t))
  st = ior(st, moe_memcpy_to_device(d_map, c_loc(map), 32_c_size_t))
  st = ior(st, moe_align_block_size_ep(d_ids, MOE_INT32, 8_c_int64_t, 8_c_int32_t, d_map, 4_c_int32_t, &
                                       2_c_int32_t, d_sorted, d_experts, d_post, d_counts, d_positions, d_ws, ws, &
                                       c_null_ptr))
  st = ior(st, moe_synchronize(c_null_ptr))
  st = ior(st, moe_memcpy_to_host(c_loc(sorted), d_sorted, 48_c_size_t))
  st = ior(st, moe_memcpy_to_host(c_loc(experts), d_experts, 24_c_size_t))
  st = ior(st, moe_memcpy_to_host(c_loc(post), d_post, 4_c_size_t))
  st = ior(st, moe_memcpy_to_host(c_loc(counts), d_counts, 16_c_size_t))
  st = ior(st, moe_memcpy_to_host(c_loc(positions), d_positions, 32_c_size_t))
  if (st /= MOE_SUCCESS) stop 1
  if (post(1) /= 8 .or. any(sorted /= want) .or. any(experts /= [0, 1, 2, 3, -1, -1])) stop 1
  if (any(counts /= [2, 1, 2, 1]) .or. any(positions /= [0, -1, 4, 1, -1, 6, 2, 5])) stop 1
  ! a NULL map with fewer local experts than globals: status, not a crash
  if (moe_align_block_size_ep(d_ids, MOE_INT32, 8_c_int64_t, 8_c_int32_t, c_null_ptr, 4_c_int32_t, 2_c_int32_t, &
                              d_sorted, d_experts, d_post, c_null_ptr, c_null_ptr, d_ws, ws, c_null_ptr) &
      /= MOE_ERROR_INVALID_ARGUMENT) stop 1
  st = ior(st, moe_free(d_ids))
  st = ior(st, moe_free(d_map))
  st = ior(st, moe_free(d_sorted))
  st = ior(st, moe_free(d_experts))
  st = ior(st, moe_free(d_post))
  st = ior(st, moe_free(d_counts))
  st = ior(st, moe_free(d_positions))
  st = ior(st, moe_free(d_ws))
  if (st /= MOE_SUCCESS) stop 1
  print '(a)', 'fortran_align_ep: ok'
end program
