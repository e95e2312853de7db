"""moe_routing.ep in one plain process (no MPI started): availability, NotAvailable without a transport, and the
checks made before any collective call. The multi-rank tests are in test_ep_mpi.py (run under mpirun)."""

import sys

import pytest

import moe_routing
from moe_routing import ep


def test_availability_is_consistent():
    assert moe_routing.available("ep") == hasattr(moe_routing._ext, "EpHandle")
    if not moe_routing.available("ep"):
        pytest.skip("the library this package was built from has no moe/ep.h")
    assert moe_routing.available("ep_mpi") == ep.transport_available("mpi")
    assert moe_routing.available("ep_nccl") == ep.transport_available("nccl")
    assert moe_routing._ext.ep_transport_available(0) == moe_routing.available("ep_mpi")
    if moe_routing.backend_name() != "cuda":
        assert not moe_routing.available("ep_nccl")
    with pytest.raises(moe_routing.InvalidArgument, match="transport must be"):
        ep.transport_available("tcp")


def test_not_available_without_a_transport():
    if moe_routing.available("ep_mpi"):
        pytest.skip("this build has MPI")
    with pytest.raises(moe_routing.NotAvailable, match="no MPI transport"):
        ep.Comm.from_mpi(None, 8)
    if not moe_routing.available("ep_nccl"):
        with pytest.raises(moe_routing.NotAvailable, match="no NCCL transport"):
            ep.Comm.from_nccl(1, 8)


def test_from_mpi_needs_an_mpi4py_communicator():
    if not moe_routing.available("ep_mpi"):
        pytest.skip("this build has no MPI transport")
    mpi = sys.modules.get("mpi4py.MPI")  # not imported here: importing it would start MPI in this process
    with pytest.raises(moe_routing.InvalidArgument, match="comm must be an mpi4py communicator"):
        ep.Comm.from_mpi(object(), 8)
    with pytest.raises(moe_routing.InvalidArgument, match="comm must be an mpi4py communicator"):
        ep.Comm.from_mpi(0, 8)
    assert sys.modules.get("mpi4py.MPI") is mpi


def test_comm_is_made_by_its_factories():
    with pytest.raises(TypeError, match="from_mpi"):
        ep.Comm()


@pytest.mark.parametrize("fields,match", [
    (dict(mode="fast"), "mode must be 'exact' or 'capacity'"),
    (dict(dispatch_dtype="complex64"), "dispatch_dtype must be one of"),
    (dict(combine_dtype=object()), "combine_dtype must be one of"),
    (dict(topk=2**31), "topk = 2147483648 is outside"),
    (dict(hidden=1.5), "hidden must be an integer"),
    (dict(max_tokens=2**63), "max_tokens = .* is outside"),
])
def test_config_refusals_name_the_field(fields, match):
    with pytest.raises(moe_routing.InvalidArgument, match=match):
        ep.Config(**{"hidden": 8, **fields})._c_args()


def test_config_dtypes_by_name_numpy_or_torch():
    np = pytest.importorskip("numpy")
    c = ep.Config(hidden=4, dispatch_dtype=np.float16, combine_dtype="bf16")
    args = c._c_args()
    assert args[2] == moe_routing._ext.DTYPES["float16"] and args[3] == moe_routing._ext.DTYPES["bfloat16"]
    torch = sys.modules.get("torch")
    if torch is not None:
        c = ep.Config(hidden=4, dispatch_dtype=torch.float8_e4m3fn, combine_dtype=torch.bfloat16)
        assert c._c_args()[2:4] == (8, moe_routing._ext.DTYPES["bfloat16"])
