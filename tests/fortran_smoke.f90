! The contract's example through the Fortran interface module, on the configured backend.
! Exit code 0: right answer; 77: no usable backend here (skipped); 1: wrong.
program fortran_smoke
  use, intrinsic :: iso_c_binding
  use moe_routing
  implicit none
  integer(c_int32_t), target :: ids(9) = [0, 1, 2, 1, 2, 3, 0, 3, 4]
  integer(c_int32_t), target :: sorted(24), experts(6), post(1)
  integer(c_int32_t) :: want(20) = [0, 6, 9, 9, 1, 3, 9, 9, 2, 4, 9, 9, 5, 7, 9, 9, 8, 9, 9, 9]
  type(c_ptr) :: d_ids, d_sorted, d_experts, d_post, d_ws
  ! moe_permute / moe_combine on that layout: 3 tokens (topk 3) of one float each
  real(c_float), target :: tok(3) = [10.0, 20.0, 30.0], perm(24), comb(3)
  integer(c_int32_t), target :: pos(9) = [0, 4, 8, 5, 9, 12, 1, 13, 16]
  real(c_float) :: want_perm(20) = [10., 30., 0., 0., 10., 20., 0., 0., 10., 20., 0., 0., 20., 30., 0., 0., &
                                    30., 0., 0., 0.]
  type(c_ptr) :: d_tok, d_perm, d_pos, d_comb
  integer(c_size_t) :: ws
  integer(c_int) :: st

  if (moe_backend_check() /= MOE_SUCCESS) stop 77
  if (moe_align_max_padded(9_c_int64_t, 5_c_int32_t, 4_c_int32_t) /= 24) stop 1
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
  st = ior(st, moe_malloc(d_tok, 12_c_size_t))
  st = ior(st, moe_malloc(d_perm, 96_c_size_t))
  st = ior(st, moe_malloc(d_pos, 36_c_size_t))
  st = ior(st, moe_malloc(d_comb, 12_c_size_t))
  st = ior(st, moe_memcpy_to_device(d_tok, c_loc(tok), 12_c_size_t))
  st = ior(st, moe_memcpy_to_device(d_pos, c_loc(pos), 36_c_size_t))
  st = ior(st, moe_permute(d_tok, MOE_FLOAT32, 3_c_int64_t, 1_c_int64_t, 3_c_int32_t, d_sorted, d_post, &
                           24_c_int64_t, d_perm, c_null_ptr))
  st = ior(st, moe_combine(d_perm, MOE_FLOAT32, MOE_ROWS_PERMUTED, 3_c_int64_t, 3_c_int32_t, 1_c_int64_t, &
                           d_pos, c_null_ptr, 1.0_c_float, d_comb, c_null_ptr))
  st = ior(st, moe_synchronize(c_null_ptr))
  st = ior(st, moe_memcpy_to_host(c_loc(perm), d_perm, 96_c_size_t))
  st = ior(st, moe_memcpy_to_host(c_loc(comb), d_comb, 12_c_size_t))
  st = ior(st, moe_free(d_tok))
  st = ior(st, moe_free(d_perm))
  st = ior(st, moe_free(d_pos))
  st = ior(st, moe_free(d_comb))
  st = ior(st, moe_free(d_ids))
  st = ior(st, moe_free(d_sorted))
  st = ior(st, moe_free(d_experts))
  st = ior(st, moe_free(d_post))
  st = ior(st, moe_free(d_ws))
  if (st /= MOE_SUCCESS) stop 1
  if (post(1) /= 20 .or. any(sorted(1:20) /= want) .or. any(sorted(21:24) /= 9)) stop 1
  if (any(experts /= [0, 1, 2, 3, 4, -1])) stop 1
  if (any(perm(1:20) /= want_perm) .or. any(comb /= [30.0, 60.0, 90.0])) stop 1
  ! a bad call: status, not a crash
  if (moe_align_block_size(d_ids, MOE_FLOAT32, 9_c_int64_t, 5_c_int32_t, 4_c_int32_t, d_sorted, &
                           d_experts, d_post, d_ws, ws, c_null_ptr) /= MOE_ERROR_UNSUPPORTED) stop 1
  if (moe_combine(d_tok, MOE_FLOAT8_E4M3, MOE_ROWS_FLAT, 3_c_int64_t, 1_c_int32_t, 1_c_int64_t, c_null_ptr, &
                  c_null_ptr, 1.0_c_float, d_comb, c_null_ptr) /= MOE_ERROR_UNSUPPORTED) stop 1
  call gating_smoke()
  print '(a)', 'fortran_smoke: ok'

contains

  ! routing.h's gating example: logits [1, 3, 2, 3], softmax, top 2, renormalized: ids [1, 3], weights [0.5, 0.5]
  subroutine gating_smoke()
    real(c_float), target :: logits(4) = [1.0, 3.0, 2.0, 3.0], weights(2)
    integer(c_int32_t), target :: gids(2)
    type(c_ptr) :: d_logits, d_ids, d_w
    type(moe_gate_t) :: gate
    integer(c_int) :: s
    gate = moe_gate_t(topk=2, score=MOE_SCORE_SOFTMAX, num_groups=1, topk_groups=1, correction_bias=c_null_ptr, &
                      renormalize=1, routed_scaling_factor=1.0)
    s = moe_malloc(d_logits, 16_c_size_t)
    s = ior(s, moe_malloc(d_ids, 8_c_size_t))
    s = ior(s, moe_malloc(d_w, 8_c_size_t))
    s = ior(s, moe_memcpy_to_device(d_logits, c_loc(logits), 16_c_size_t))
    s = ior(s, moe_topk_gating(d_logits, MOE_FLOAT32, 1_c_int64_t, 4_c_int32_t, gate, d_ids, d_w, c_null_ptr))
    s = ior(s, moe_synchronize(c_null_ptr))
    s = ior(s, moe_memcpy_to_host(c_loc(gids), d_ids, 8_c_size_t))
    s = ior(s, moe_memcpy_to_host(c_loc(weights), d_w, 8_c_size_t))
    s = ior(s, moe_free(d_logits))
    s = ior(s, moe_free(d_ids))
    s = ior(s, moe_free(d_w))
    if (s /= MOE_SUCCESS) stop 1
    if (any(gids /= [1, 3]) .or. any(weights /= [0.5, 0.5])) stop 1
    gate%topk = 5  ! more than the experts: an error status
    if (moe_topk_gating(d_logits, MOE_FLOAT32, 1_c_int64_t, 4_c_int32_t, gate, d_ids, d_w, c_null_ptr) &
        /= MOE_ERROR_INVALID_ARGUMENT) stop 1
  end subroutine
end program
