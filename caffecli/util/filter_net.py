"""NetState filtering (Caffe's Net::FilterNet and StateMeetsRule): which layers a net keeps for
its phase, level and stages."""
from .. import glog
from ..errors import CaffeError
from ..proto import caffe_pb2


def state_meets_rule(state, rule, layer_name, log=True):
    """Whether NetState ``state`` satisfies NetStateRule ``rule`` (Caffe's StateMeetsRule)."""
    def say(name, msg, *args):
        if log:
            glog.info(name, (msg + " specified by a rule in layer %s") % (args + (layer_name,)))
    if rule.HasField("phase") and rule.phase != state.phase:
        say("net.state_rule_phase", "The NetState phase (%d) differed from the phase (%d)",
            state.phase, rule.phase)
        return False
    if rule.HasField("min_level") and state.level < rule.min_level:
        say("net.state_rule_min_level", "The NetState level (%d) is above the min_level (%d)",
            state.level, rule.min_level)
        return False
    if rule.HasField("max_level") and state.level > rule.max_level:
        say("net.state_rule_max_level", "The NetState level (%d) is above the max_level (%d)",
            state.level, rule.max_level)
        return False
    for s in rule.stage:
        if s not in state.stage:
            say("net.state_rule_stage", "The NetState did not contain stage '%s'", s)
            return False
    for s in rule.not_stage:
        if s in state.stage:
            say("net.state_rule_not_stage", "The NetState contained a not_stage '%s'", s)
            return False
    return True


def filter_net(param, log=True):
    """A copy of ``param`` keeping only the layers its state's include/exclude rules admit."""
    out = caffe_pb2.NetParameter()
    out.CopyFrom(param)
    del out.layer[:]
    for lp in param.layer:
        if len(lp.include) and len(lp.exclude):
            raise CaffeError("Layer %s: specify either include rules or exclude rules; not both."
                             % lp.name)
        included = len(lp.include) == 0
        for rule in lp.exclude:
            if included and state_meets_rule(param.state, rule, lp.name, log):
                included = False
        for rule in lp.include:
            if not included and state_meets_rule(param.state, rule, lp.name, log):
                included = True
        if included:
            out.layer.add().CopyFrom(lp)
    return out
