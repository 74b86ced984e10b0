"""Embedded simulated inference server (OpenAI, TGI and Ollama routes): the default target and the timing ground
truth.

Pure asyncio (no gevent / locust imports), so it can run in its own process or on a thread beside a test.
"""

from loadgen.sim.engine import Engine, SimSequence, StepPlan
from loadgen.sim.faults import FaultSpec, UnknownFaultKnobError, fault_knobs, parse_fault_arg
from loadgen.sim.launch import SimProcess, SimServerThread, SimStartError, start_sim_process
from loadgen.sim.profiles import SimProfile, get_profile, profile_registry
from loadgen.sim.server import SimCluster, VariantServer
from loadgen.sim.truth import TruthLog, TruthRequest, load_truth
from loadgen.sim.variant_spec import VariantSpec, parse_variant

__all__ = [
    "Engine",
    "FaultSpec",
    "SimCluster",
    "SimProcess",
    "SimProfile",
    "SimSequence",
    "SimServerThread",
    "SimStartError",
    "StepPlan",
    "TruthLog",
    "TruthRequest",
    "UnknownFaultKnobError",
    "VariantServer",
    "VariantSpec",
    "fault_knobs",
    "get_profile",
    "load_truth",
    "parse_fault_arg",
    "parse_variant",
    "profile_registry",
    "start_sim_process",
]
