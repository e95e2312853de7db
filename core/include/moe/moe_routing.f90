! Fortran interface to the moe-routing C API (moe/routing.h), through iso_c_binding. Compile this file with
! your Fortran compiler (modules are compiler-specific) and link MoERouting::moe_routing. Pointers are
! type(c_ptr) in the backend's memory space (moe_malloc); sizes are c_int64_t / c_int32_t / c_size_t.
module moe_routing
  use, intrinsic :: iso_c_binding
  implicit none

  ! moe_status_t
  integer(c_int), parameter :: MOE_SUCCESS = 0, MOE_ERROR_INVALID_ARGUMENT = 1, &
                               MOE_ERROR_UNSUPPORTED = 2, MOE_ERROR_BACKEND = 3
  ! moe_dtype_t
  integer(c_int), parameter :: MOE_INT8 = 0, MOE_UINT8 = 1, MOE_INT16 = 2, MOE_INT32 = 3, MOE_INT64 = 4, &
                               MOE_FLOAT32 = 5, MOE_FLOAT16 = 6, MOE_BFLOAT16 = 7, &
                               MOE_FLOAT8_E4M3 = 8, MOE_FLOAT8_E5M2 = 9
  ! moe_rows_layout_t
  integer(c_int), parameter :: MOE_ROWS_FLAT = 0, MOE_ROWS_PERMUTED = 1
  ! moe_score_t
  integer(c_int), parameter :: MOE_SCORE_SOFTMAX = 0, MOE_SCORE_SIGMOID = 1, MOE_SCORE_SOFTMAX_TOPK = 2

  ! moe_gate_t (moe_topk_gating's settings; pass it by reference). correction_bias: c_null_ptr or a pointer to
  ! [num_experts] reals in the backend's memory. routed_scaling_factor: 1.0 for none.
  type, bind(C) :: moe_gate_t
    integer(c_int32_t) :: topk
    integer(c_int) :: score
    integer(c_int32_t) :: num_groups
    integer(c_int32_t) :: topk_groups
    type(c_ptr) :: correction_bias
    integer(c_int32_t) :: renormalize
    real(c_float) :: routed_scaling_factor
  end type

  interface
    function moe_backend_name() bind(C, name="moe_backend_name") result(p)
      import :: c_ptr
      type(c_ptr) :: p
    end function
    function moe_last_error() bind(C, name="moe_last_error") result(p)
      import :: c_ptr
      type(c_ptr) :: p
    end function
    integer(c_int) function moe_backend_check() bind(C, name="moe_backend_check")
      import :: c_int
    end function
    integer(c_int) function moe_malloc(ptr, bytes) bind(C, name="moe_malloc")
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), intent(out) :: ptr
      integer(c_size_t), value :: bytes
    end function
    integer(c_int) function moe_free(ptr) bind(C, name="moe_free")
      import :: c_int, c_ptr
      type(c_ptr), value :: ptr
    end function
    integer(c_int) function moe_memcpy_to_device(dst, src, bytes) bind(C, name="moe_memcpy_to_device")
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), value :: dst, src
      integer(c_size_t), value :: bytes
    end function
    integer(c_int) function moe_memcpy_to_host(dst, src, bytes) bind(C, name="moe_memcpy_to_host")
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), value :: dst, src
      integer(c_size_t), value :: bytes
    end function
    integer(c_int) function moe_synchronize(stream) bind(C, name="moe_synchronize")
      import :: c_int, c_ptr
      type(c_ptr), value :: stream
    end function
    integer(c_int64_t) function moe_align_max_padded(numel, num_experts, block_size) &
        bind(C, name="moe_align_max_padded")
      import :: c_int64_t, c_int32_t
      integer(c_int64_t), value :: numel
      integer(c_int32_t), value :: num_experts, block_size
    end function
    integer(c_int64_t) function moe_align_max_blocks(numel, num_experts, block_size) &
        bind(C, name="moe_align_max_blocks")
      import :: c_int64_t, c_int32_t
      integer(c_int64_t), value :: numel
      integer(c_int32_t), value :: num_experts, block_size
    end function
    integer(c_int) function moe_align_workspace_size(numel, num_experts, block_size, bytes) &
        bind(C, name="moe_align_workspace_size")
      import :: c_int, c_int64_t, c_int32_t, c_size_t
      integer(c_int64_t), value :: numel
      integer(c_int32_t), value :: num_experts, block_size
      integer(c_size_t), intent(out) :: bytes
    end function
    integer(c_int) function moe_align_block_size(topk_ids, id_type, numel, num_experts, block_size, &
        sorted_token_ids, expert_ids, num_tokens_post_pad, workspace, workspace_bytes, stream) &
        bind(C, name="moe_align_block_size")
      import :: c_int, c_int64_t, c_int32_t, c_size_t, c_ptr
      type(c_ptr), value :: topk_ids, sorted_token_ids, expert_ids, num_tokens_post_pad, workspace, stream
      integer(c_int), value :: id_type
      integer(c_int64_t), value :: numel
      integer(c_int32_t), value :: num_experts, block_size
      integer(c_size_t), value :: workspace_bytes
    end function
    ! expert parallelism (routing.h, moe_align_block_size_ep): expert_map, expert_counts and token_positions
    ! may be c_null_ptr
    integer(c_int) function moe_align_workspace_size_ep(numel, num_experts, num_local_experts, block_size, bytes) &
        bind(C, name="moe_align_workspace_size_ep")
      import :: c_int, c_int64_t, c_int32_t, c_size_t
      integer(c_int64_t), value :: numel
      integer(c_int32_t), value :: num_experts, num_local_experts, block_size
      integer(c_size_t), intent(out) :: bytes
    end function
    integer(c_int) function moe_align_block_size_ep(topk_ids, id_type, numel, num_experts, expert_map, &
        num_local_experts, block_size, sorted_token_ids, expert_ids, num_tokens_post_pad, expert_counts, &
        token_positions, workspace, workspace_bytes, stream) bind(C, name="moe_align_block_size_ep")
      import :: c_int, c_int64_t, c_int32_t, c_size_t, c_ptr
      type(c_ptr), value :: topk_ids, expert_map, sorted_token_ids, expert_ids, num_tokens_post_pad, &
                            expert_counts, token_positions, workspace, stream
      integer(c_int), value :: id_type
      integer(c_int64_t), value :: numel
      integer(c_int32_t), value :: num_experts, num_local_experts, block_size
      integer(c_size_t), value :: workspace_bytes
    end function
    integer(c_int) function moe_sum(input, dtype, num_tokens, topk, hidden, output, stream) &
        bind(C, name="moe_sum")
      import :: c_int, c_int64_t, c_int32_t, c_ptr
      type(c_ptr), value :: input, output, stream
      integer(c_int), value :: dtype
      integer(c_int64_t), value :: num_tokens, hidden
      integer(c_int32_t), value :: topk
    end function
    integer(c_int) function moe_permute(hidden, dtype, num_tokens, hidden_size, topk, sorted_token_ids, &
        num_tokens_post_pad, max_rows, permuted, stream) bind(C, name="moe_permute")
      import :: c_int, c_int64_t, c_int32_t, c_ptr
      type(c_ptr), value :: hidden, sorted_token_ids, num_tokens_post_pad, permuted, stream
      integer(c_int), value :: dtype
      integer(c_int64_t), value :: num_tokens, hidden_size, max_rows
      integer(c_int32_t), value :: topk
    end function
    integer(c_int) function moe_combine(rows, dtype, layout, num_tokens, topk, hidden, token_positions, &
        topk_weights, scale, output, stream) bind(C, name="moe_combine")
      import :: c_int, c_int64_t, c_int32_t, c_float, c_ptr
      type(c_ptr), value :: rows, token_positions, topk_weights, output, stream
      integer(c_int), value :: dtype, layout
      integer(c_int64_t), value :: num_tokens, hidden
      integer(c_int32_t), value :: topk
      real(c_float), value :: scale
    end function
    integer(c_int) function moe_topk_gating(logits, dtype, num_tokens, num_experts, gate, topk_ids, &
        topk_weights, stream) bind(C, name="moe_topk_gating")
      import :: c_int, c_int64_t, c_int32_t, c_ptr, moe_gate_t
      type(c_ptr), value :: logits, topk_ids, topk_weights, stream
      integer(c_int), value :: dtype
      integer(c_int64_t), value :: num_tokens
      integer(c_int32_t), value :: num_experts
      type(moe_gate_t), intent(in) :: gate
    end function
    integer(c_int) function moe_route_workspace_size(num_tokens, num_experts, gate, num_local_experts, &
        block_size, bytes) bind(C, name="moe_route_workspace_size")
      import :: c_int, c_int64_t, c_int32_t, c_size_t, moe_gate_t
      integer(c_int64_t), value :: num_tokens
      integer(c_int32_t), value :: num_experts, num_local_experts, block_size
      type(moe_gate_t), intent(in) :: gate
      integer(c_size_t), intent(out) :: bytes
    end function
    integer(c_int) function moe_route(logits, dtype, num_tokens, num_experts, gate, expert_map, &
        num_local_experts, block_size, topk_ids, topk_weights, sorted_token_ids, expert_ids, &
        num_tokens_post_pad, token_positions, workspace, workspace_bytes, stream) bind(C, name="moe_route")
      import :: c_int, c_int64_t, c_int32_t, c_size_t, c_ptr, moe_gate_t
      type(c_ptr), value :: logits, expert_map, topk_ids, topk_weights, sorted_token_ids, expert_ids, &
                            num_tokens_post_pad, token_positions, workspace, stream
      integer(c_int), value :: dtype
      integer(c_int64_t), value :: num_tokens
      integer(c_int32_t), value :: num_experts, num_local_experts, block_size
      type(moe_gate_t), intent(in) :: gate
      integer(c_size_t), value :: workspace_bytes
    end function
  end interface
end module moe_routing
