"""Every name the compiled module exports is public somewhere, or deliberately private."""

from __future__ import annotations

import affinity
import affinity._affinity as compiled
import affinity.defaults
import affinity.records
import affinity.routing
import affinity.testing
import affinity.units

#: Compiled names used only through a Python wrapper.
DELIBERATELY_PRIVATE = {
    "RoutingTable",
    # the cluster's node name prefixes and connection states: used through affinity.cluster_node,
    # affinity.cluster_ptp and affinity.cluster_failover
    "CLUSTER_NODE_NAME_PREFIX",
    "CLUSTER_PTP_LINK_PREFIX",
    "CLUSTER_NODE_WATCH_PREFIX",
    "CLUSTER_CONNECTION_STATES",
    "HASH_VERSION",
    "affinity_hash",
    "select_member",
    "PosixRegex",
    # checks a channel URI without a driver: used by affinity.spark.options at plan time
    "check_channel",
    # the one size/duration grammar: wrapped by affinity.units (seconds, typed units)
    "parse_size",
    "parse_duration_ns",
    # consumer groups: wrapped by affinity.groups.GroupPublisher / GroupConsumer / GroupObserver
    "GroupPublisherCore",
    "GroupConsumerCore",
    "GroupObserverCore",
    # a group's definition learned through bootstrap: used by affinity.groups when the registry has none
    "group_bootstrap",
}
#: Subject router: wrapped by affinity.subjects (Subscriber, Source, SubjectRouter, Flags).
DELIBERATELY_PRIVATE |= {
    "SubjectRouterCore",
    "SubjectSubscriberCore",
    "SubjectSourceCore",
    "RouterStatusInfo",
    "SUBJECT_FLAG_IMAGE",
    "SUBJECT_FLAG_UPDATE",
    "SUBJECT_FLAG_NODATA_UNAVAILABLE",
    "SUBJECT_FLAG_NODATA_NOTFOUND",
    "SUBJECT_FLAG_STATUS",
    "SUBJECT_FLAG_REFUSED",
    "ROUTER_BACKLOG_BUDGET",
    "ROUTER_MIN_BACKLOG_BUDGET",
    "SUBJECT_KIND_REQUEST",
    "SUBJECT_KIND_DISCARD",
    "SUBJECT_KIND_DATA",
    # publish at a cluster slave and erase: wrapped by affinity.subjects (Flags, Source.status)
    "SUBJECT_FLAG_PUBLISH",
    "SUBJECT_FLAG_ERASE",
    "SUBJECT_FLAG_DOMAIN",
    "subject_with_domain",
    "subject_domain",
    "SUBJECT_ORIGIN_LENGTH",
    "FORWARD_WARNING",
    "FORWARD_CLEARED",
    "FORWARD_RESYNC",
}
#: Cluster nodes: used through affinity.cluster_node and affinity.cluster_info.
DELIBERATELY_PRIVATE |= {
    "CLUSTER_SOURCE_PREFIX",
    "CLUSTER_MIRROR_SOURCE_LABEL",
    "CLUSTER_NODE_INFO_SUBJECT_PREFIX",
    "CLUSTER_NODE_INFO_SUBJECT_SUFFIX",
    "ClusterForwardQueues",
    "ClusterSlaveCache",
}
#: The bootstrap responder of `affinity router --bootstrap-listen`: used by affinity.cli.router.
DELIBERATELY_PRIVATE |= {"BootstrapResponderCore", "BOOTSTRAP_RESPONDER_OPTIONS"}


def test_every_compiled_export_is_public_or_deliberately_private() -> None:
    public = set(affinity.__all__) | set(vars(affinity.testing)) | set(vars(affinity.routing))
    # The defaults and the size/duration grammar, under their own modules.
    public |= {f"DEFAULT_{name}" for name in affinity.defaults.__all__} | {"DRIVER_SETTINGS"}
    public |= set(affinity.records.__all__)
    exported = set(compiled.__all__)
    assert exported - public - DELIBERATELY_PRIVATE == set()


def test_public_api_names_resolve() -> None:
    for name in affinity.__all__:
        assert getattr(affinity, name) is not None, name


def test_offer_outcomes_are_the_aeron_codes() -> None:
    codes = (
        affinity.NOT_CONNECTED,
        affinity.BACK_PRESSURED,
        affinity.ADMIN_ACTION,
        affinity.CLOSED,
        affinity.MAX_POSITION_EXCEEDED,
    )
    assert codes == (-1, -2, -3, -4, -5)


def test_every_exception_derives_from_the_root() -> None:
    for name in affinity.exceptions.__all__:
        root = affinity.AffinityWarning if name.endswith("Warning") else affinity.AffinityError
        assert issubclass(getattr(affinity.exceptions, name), root)
