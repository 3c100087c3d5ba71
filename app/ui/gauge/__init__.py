"""The speculation gauge: live decode speed, acceptance rate α, mean acceptance length τ,
acceptance by draft position, draft cost c, predicted versus measured speedup."""
