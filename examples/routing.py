"""The README's routing example: the affinity tables of examples/services.conf, without a transport.

Run it from anywhere: ``python examples/routing.py``.
"""

from pathlib import Path

from affinity.config import parse_file
from affinity.routing import Router

CONFIG = Path(__file__).with_name("services.conf")  # examples/services.conf

router = Router.from_config(parse_file(CONFIG))
decision = router.subscribe("/PRIVATE/alice/BLOTTER/TRADE")  # .member, .reason, .composite
print(decision.member, decision.reason)
router.subscribe("/PRIVATE/alice/FXTRADE")  # same user, same affinity key: same adapter
router.set_member_up("TradeAdapterB", False)  # alice's affinity moves to the survivor
explanation = router.explain("/PRIVATE/alice/BLOTTER/TRADE")  # rule, composite, member, why, since
print(explanation.member, router.explain("/PRIVATE/alice/FXTRADE").member)
