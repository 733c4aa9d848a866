"""Today's DMS, completed: the payment quotes NuNet's appliance asks for before it pays, and
typed executor stats in the usage replies.

The wire forms are what Go's ``encoding/json`` writes for the structs of
``tokenomics/contracts/contract.go`` (068b81ebda3d) and ``dms/node/behaviors_deployment.go``:
field order as declared, ``omitempty`` strings left out, a ``time.Time`` always written (it is
a struct to ``omitempty``). The devnet holds no transactions, and answers the quotes as a DMS
without any does.
"""

from __future__ import annotations

import pytest

from dmsgw.behaviors.catalog import (
    CONTRACT_PAYMENT_QUOTE_CANCEL,
    CONTRACT_PAYMENT_QUOTE_GET,
    CONTRACT_PAYMENT_QUOTE_VALIDATE,
    CONTRACT_TRANSACTIONS_CONFIRM,
    get_behavior,
)
from dmsgw.behaviors.deployment import DeploymentInfoResponse, DeploymentStatusResponse
from dmsgw.behaviors.executor_stats import CPUUsageStats, ExecutorStats, MemoryStats
from dmsgw.behaviors.node import DMSBehaviorError
from dmsgw.behaviors.tokenomics import (
    ContractCancelPaymentQuoteRequest,
    ContractConfirmLocalTransactionRequest,
    ContractGetPaymentQuoteRequest,
    ContractGetPaymentQuoteResponse,
    ContractValidatePaymentQuoteRequest,
    ContractValidatePaymentQuoteResponse,
)
from dmsgw.devnet.pytest_plugin import DevnetHandle, one_node_ensemble, shell_allocation
from dmsgw.gojson import GoDecodeError

QUOTE = (
    '{"quote_id":"quote_tx-7_1764347520000000000","original_amount":"12.5",'
    '"converted_amount":"250.00000000","pricing_currency":"USDT","payment_currency":"NTX",'
    '"exchange_rate":"20.00000000","expires_at":"2026-11-28T16:34:00.123456789Z"}'
)
NO_TRANSACTION = "failed to get transaction: transaction not found with unique_id: tx-7"


def test_the_quote_behaviors_are_in_the_catalog_under_their_names() -> None:
    for behavior, name in (
        (CONTRACT_PAYMENT_QUOTE_GET, "/dms/tokenomics/contract/payment/quote/get"),
        (CONTRACT_PAYMENT_QUOTE_VALIDATE, "/dms/tokenomics/contract/payment/quote/validate"),
        (CONTRACT_PAYMENT_QUOTE_CANCEL, "/dms/tokenomics/contract/payment/quote/cancel"),
    ):
        assert get_behavior(name) is behavior and behavior.capability == name
        assert behavior.namespace[0] == "contract"


def test_quote_requests_are_what_go_writes() -> None:
    get = CONTRACT_PAYMENT_QUOTE_GET.encode_request(ContractGetPaymentQuoteRequest("tx-7"))
    assert get == b'{"unique_id":"tx-7"}'
    for behavior, request in (
        (CONTRACT_PAYMENT_QUOTE_VALIDATE, ContractValidatePaymentQuoteRequest("q-1")),
        (CONTRACT_PAYMENT_QUOTE_CANCEL, ContractCancelPaymentQuoteRequest("q-1")),
    ):
        assert behavior.encode_request(request) == b'{"quote_id":"q-1"}'


def test_a_confirmation_names_its_quote_only_when_there_is_one() -> None:
    paid = ContractConfirmLocalTransactionRequest("tx-7", "0xabc", "CARDANO", quote_id="q-1")
    assert CONTRACT_TRANSACTIONS_CONFIRM.encode_request(paid) == (
        b'{"unique_id":"tx-7","tx_hash":"0xabc","blockchain":"CARDANO","quote_id":"q-1"}'
    )
    plain = ContractConfirmLocalTransactionRequest("tx-7", "0xabc", "CARDANO")
    assert b"quote_id" not in CONTRACT_TRANSACTIONS_CONFIRM.encode_request(plain)


def test_a_quote_reads_and_writes_back_byte_for_byte() -> None:
    quote = ContractGetPaymentQuoteResponse.from_json(QUOTE)
    assert (quote.converted_amount, quote.expires_at) == (
        "250.00000000",
        "2026-11-28T16:34:00.123456789Z",
    )
    assert quote.to_json().decode() == QUOTE
    valid = ContractValidatePaymentQuoteResponse.from_json('{"valid":true,' + QUOTE[1:])
    assert valid.valid and valid.to_json().decode() == '{"valid":true,' + QUOTE[1:]


def test_a_refused_quote_keeps_gos_zero_time() -> None:
    """A handler's error reply sets only ``error``: Go still writes the zero ``expires_at``."""
    refused = ContractGetPaymentQuoteResponse(error=NO_TRANSACTION)
    assert refused.to_json().decode() == (
        '{"expires_at":"0001-01-01T00:00:00Z","error":"' + NO_TRANSACTION + '"}'
    )
    invalid = ContractValidatePaymentQuoteResponse(error="quote validation failed: x")
    assert invalid.to_json().startswith(b'{"valid":false,"expires_at":"0001-01-01T00:00:00Z"')
    with pytest.raises(GoDecodeError, match="cannot parse"):
        ContractGetPaymentQuoteResponse.from_json('{"expires_at":"tomorrow"}')


# --- typed executor stats ------------------------------------------------------------------

STATS = ExecutorStats(
    cpu_usage=CPUUsageStats(total_usage=9007199254740993, percent=12.5),
    memory=MemoryStats(usage=1 << 20, limit=1 << 30),
    timestamp=1764347520000,
)


def test_usage_replies_carry_typed_stats_with_exact_integers() -> None:
    stats = STATS.to_json().decode()
    wire = '{"status":"Running","error":"","allocation_usage":{"a":' + stats + ',"b":null}}'
    reply = DeploymentStatusResponse.from_json(wire)
    assert reply.allocation_usage == {"a": STATS, "b": None}
    assert reply.to_json().decode() == wire
    assert '"total_usage":9007199254740993' in stats
    info = DeploymentInfoResponse.from_json(
        '{"id":"e","status":"Running","usage":{"a":' + stats + "}}"
    )
    assert info.usage == {"a": STATS}


# --- on the devnet -------------------------------------------------------------------------


def test_the_devnet_answers_quotes_as_a_dms_without_transactions(
    dms_devnet: DevnetHandle,
) -> None:
    dms = dms_devnet.client(caps=("/dms/tokenomics",))
    with pytest.raises(DMSBehaviorError, match=NO_TRANSACTION):
        dms.contract.payment_quote_get(unique_id="tx-7")
    with pytest.raises(DMSBehaviorError, match="quote validation failed: quote not found: q-1"):
        dms.contract.payment_quote_validate(quote_id="q-1")
    with pytest.raises(DMSBehaviorError, match=r"quote not found: quote not found: q-1$"):
        dms.contract.payment_quote_cancel(quote_id="q-1")


def test_the_devnet_measures_a_running_deployment_in_status_and_info(
    dms_devnet: DevnetHandle,
) -> None:
    dms = dms_devnet.dms
    ensemble = one_node_ensemble({"web": shell_allocation("service", "exec sleep 300")})
    eid = dms.deployment.new(ensemble).ensemble_id
    try:
        assert dms_devnet.wait_status(eid, "Running", "Failed") == "Running"
        status = dms.deployment.status(eid, include_usage=True)
        (stats,) = (status.allocation_usage or {}).values()
        assert isinstance(stats, ExecutorStats) and stats.measured
        info = dms.deployment.info(eid, include_usage=True)
        (again,) = (info.usage or {}).values()
        assert isinstance(again, ExecutorStats) and again.measured
    finally:
        dms.deployment.shutdown(eid)
