"""Payloads of ``/dms/tokenomics/contract/*``: contracts between a requestor, a provider and
a solution enabler, their payments and usage.

Mirrors the request and reply structs of ``tokenomics/contracts/contract.go`` that a client
sends (field for field, JSON tags as there). A ``Contract`` inside a reply, the payment details
and the transaction records are Go structs this gateway does not mirror: they are kept as
plain JSON (integers exact, keys re-encoded sorted), as other unmirrored structs are.

The payment quotes (``/dms/tokenomics/contract/payment/quote/{get,validate,cancel}``, which
NuNet's appliance calls before it pays a transaction priced in another currency) and the
confirmation's ``quote_id`` mirror ``contract.go`` at commit ``068b81ebda3d``; the DMS answers
them in ``dms/node/behaviors_contract.go`` (``handleGetPaymentQuote``, ``handleValidate…``,
``handleCancel…``), with the errors of ``tokenomics/store/payment_quote/store.go``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ..gojson import (
    ANY,
    BOOL,
    FLOAT64,
    INT64,
    PLAIN,
    STRING,
    GoStruct,
    MapOf,
    Ptr,
    SliceOf,
    StructOf,
    go_field,
)
from ..keys.did import DID
from .gotime import GO_TIME, ZERO_TIME
from .resources import Resources

__all__ = [
    "CollectUsagesAndForwardToPaymentProvidersReponse",
    "CollectUsagesAndForwardToPaymentProvidersRequest",
    "ContractApproveLocalRequest",
    "ContractApproveLocalResponse",
    "ContractCompletionRequest",
    "ContractCompletionResponse",
    "ContractCancelPaymentQuoteRequest",
    "ContractCancelPaymentQuoteResponse",
    "ContractConfirmLocalTransactionRequest",
    "ContractConfirmLocalTransactionResponse",
    "ContractGetPaymentQuoteRequest",
    "ContractGetPaymentQuoteResponse",
    "ContractListIncomingRequest",
    "ContractListIncomingResponse",
    "ContractListLocalTransactionsRequest",
    "ContractListLocalTransactionsResponse",
    "ContractParticipants",
    "ContractPaymentStatusRequest",
    "ContractPaymentStatusResponse",
    "ContractSettleRequest",
    "ContractSettleResponse",
    "ContractStatusRequest",
    "ContractStatusResponse",
    "ContractTerminationRequest",
    "ContractTerminationResponse",
    "ContractValidatePaymentQuoteRequest",
    "ContractValidatePaymentQuoteResponse",
    "ContractValidateRequest",
    "ContractValidateResponse",
    "CreateContractRequest",
    "CreateContractResponse",
    "DurationDetails",
    "PenaltyClause",
    "TerminationOption",
]


@dataclasses.dataclass(frozen=True, slots=True)
class TerminationOption(GoStruct):
    """Whether a long-running contract may be ended early, and the notice (ns)."""

    GO_NAME = "TerminationOption"
    allowed: bool = go_field("allowed", BOOL, default=False)
    notice_period: int = go_field("notice_period", INT64, default=0)


@dataclasses.dataclass(frozen=True, slots=True)
class PenaltyClause(GoStruct):
    GO_NAME = "PenaltyClause"
    condition: str = go_field("condition", STRING, default="")
    penalty: float = go_field("penalty", FLOAT64, default=0.0)


@dataclasses.dataclass(frozen=True, slots=True)
class ContractParticipants(GoStruct):
    GO_NAME = "ContractParticipants"
    provider: DID = go_field("provider", StructOf(DID), default=DID())
    requestor: DID = go_field("requestor", StructOf(DID), default=DID())


@dataclasses.dataclass(frozen=True, slots=True)
class DurationDetails(GoStruct):
    GO_NAME = "DurationDetails"
    start_date: str = go_field("start_date", GO_TIME, default=ZERO_TIME)
    end_date: str = go_field("end_date", GO_TIME, default=ZERO_TIME)


@dataclasses.dataclass(frozen=True, slots=True)
class CreateContractRequest(GoStruct):
    """A contract to create on its solution enabler (``payment_details`` as plain JSON)."""

    GO_NAME = "CreateContractRequest"
    metadata: Mapping[str, str] | None = go_field("metadata", MapOf(STRING), default=None)
    solution_enabler_did: DID = go_field("solution_enabler_did", StructOf(DID), default=DID())
    payment_validator_did: DID = go_field("payment_validator_did", StructOf(DID), default=DID())
    resource_configuration: Resources = go_field(
        "resource_configuration", StructOf(Resources), default=Resources()
    )
    termination_option: TerminationOption | None = go_field(
        "termination_option", Ptr(StructOf(TerminationOption)), default=None
    )
    penalties: tuple[PenaltyClause, ...] | None = go_field(
        "penalties", SliceOf(StructOf(PenaltyClause)), default=None
    )
    payment_details: Any = go_field("payment_details", PLAIN, default=None)
    contract_terms: Any = go_field("contract_terms", ANY, default=None)
    contract_participants: ContractParticipants = go_field(
        "contract_participants", StructOf(ContractParticipants), default=ContractParticipants()
    )
    duration: DurationDetails = go_field(
        "duration", StructOf(DurationDetails), default=DurationDetails()
    )
    disable_billing: bool = go_field("disable_billing", BOOL, omitempty=True, default=False)


@dataclasses.dataclass(frozen=True, slots=True)
class CreateContractResponse(GoStruct):
    GO_NAME = "CreateContractResponse"
    contract_request: CreateContractRequest = go_field(
        "contract_request", StructOf(CreateContractRequest), default=CreateContractRequest()
    )
    contract_did: str = go_field("contract_did", STRING, default="")
    pub_key: str = go_field("pub_key", STRING, default="")
    error: str = go_field("error", STRING, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class ContractStatusRequest(GoStruct):
    """Ask the contract's host for it by DID (the same shape names the contract in
    ``terminate``, ``complete``, ``settle``, ``validate`` and ``approve_local``)."""

    GO_NAME = "ContractStatusRequest"
    contract_did: str = go_field("contract_did", STRING, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class ContractTerminationRequest(GoStruct):
    GO_NAME = "ContractTerminationRequest"
    contract_did: str = go_field("contract_did", STRING, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class ContractTerminationResponse(GoStruct):
    GO_NAME = "ContractTerminationResponse"
    error: str = go_field("error", STRING, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class ContractCompletionRequest(GoStruct):
    GO_NAME = "ContractCompletionRequest"
    contract_did: str = go_field("contract_did", STRING, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class ContractCompletionResponse(GoStruct):
    GO_NAME = "ContractCompletionResponse"
    error: str = go_field("error", STRING, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class ContractSettleRequest(GoStruct):
    GO_NAME = "ContractSettleRequest"
    contract_did: str = go_field("contract_did", STRING, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class ContractSettleResponse(GoStruct):
    GO_NAME = "ContractSettleResponse"
    error: str = go_field("error", STRING, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class ContractValidateRequest(GoStruct):
    GO_NAME = "ContractValidateRequest"
    contract_did: str = go_field("contract_did", STRING, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class ContractApproveLocalRequest(GoStruct):
    GO_NAME = "ContractApproveLocalRequest"
    contract_did: str = go_field("contract_did", STRING, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class ContractConfirmLocalTransactionResponse(GoStruct):
    GO_NAME = "ContractConfirmLocalTransactionResponse"
    error: str = go_field("error", STRING, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class ContractStatusResponse(GoStruct):
    """The contract as its host holds it (plain JSON: ``Contract`` is not mirrored)."""

    GO_NAME = "ContractStatusResponse"
    error: str = go_field("error", STRING, default="")
    contract: Any = go_field("contract", PLAIN, default=None)


@dataclasses.dataclass(frozen=True, slots=True)
class ContractValidateResponse(GoStruct):
    GO_NAME = "ContractValidateResponse"
    valid: bool = go_field("valid", BOOL, default=False)
    current_status: str = go_field("current_status", STRING, default="")
    error: str = go_field("error", STRING, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class ContractApproveLocalResponse(GoStruct):
    GO_NAME = "ContractApproveLocalResponse"
    success: bool = go_field("success", BOOL, default=False)
    error: str = go_field("error", STRING, omitempty=True, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class ContractListIncomingRequest(GoStruct):
    """``role``: ``provider`` or ``requestor`` (empty: both)."""

    GO_NAME = "ContractListIncomingRequest"
    role: str = go_field("role", STRING, omitempty=True, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class ContractListIncomingResponse(GoStruct):
    GO_NAME = "ContractListIncomingResponse"
    contracts: Any = go_field("contracts", PLAIN, default=None)
    error: str = go_field("error", STRING, omitempty=True, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class ContractPaymentStatusRequest(GoStruct):
    GO_NAME = "ContractPaymentStatusRequest"
    unique_id: str = go_field("unique_id", STRING, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class ContractPaymentStatusResponse(GoStruct):
    GO_NAME = "ContractPaymentStatusResponse"
    unique_id: str = go_field("unique_id", STRING, default="")
    paid: bool = go_field("paid", BOOL, default=False)
    error: str = go_field("error", STRING, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class CollectUsagesAndForwardToPaymentProvidersRequest(GoStruct):
    """``contract_did`` empty: every contract of the host."""

    GO_NAME = "CollectUsagesAndForwardToPaymentProvidersRequest"
    contract_did: str = go_field("contract_did", STRING, omitempty=True, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class CollectUsagesAndForwardToPaymentProvidersReponse(GoStruct):
    """(sic: the Go name's spelling.) ``results`` per contract, as plain JSON."""

    GO_NAME = "CollectUsagesAndForwardToPaymentProvidersReponse"
    error: str = go_field("error", STRING, default="")
    total_usages: int = go_field("total_usages", INT64, default=0)
    results: Any = go_field("results", PLAIN, omitempty=True, default=None)


@dataclasses.dataclass(frozen=True, slots=True)
class ContractListLocalTransactionsRequest(GoStruct):
    """No fields in the checked source (newer DMSs add filters, not mirrored here)."""

    GO_NAME = "ContractListLocalTransactionsRequest"


@dataclasses.dataclass(frozen=True, slots=True)
class ContractListLocalTransactionsResponse(GoStruct):
    GO_NAME = "ContractListLocalTransactionsResponse"
    error: str = go_field("error", STRING, default="")
    transactions: Any = go_field("transactions", PLAIN, default=None)


@dataclasses.dataclass(frozen=True, slots=True)
class ContractConfirmLocalTransactionRequest(GoStruct):
    GO_NAME = "ContractConfirmLocalTransactionRequest"
    unique_id: str = go_field("unique_id", STRING, default="")
    tx_hash: str = go_field("tx_hash", STRING, default="")
    blockchain: str = go_field("blockchain", STRING, default="")
    quote_id: str = go_field("quote_id", STRING, omitempty=True, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class ContractGetPaymentQuoteRequest(GoStruct):
    """A quote for the transaction ``unique_id``: its amount converted from the pricing
    currency to the payment currency at today's rate, valid for a while (two minutes by
    default). The DMS refuses a second quote while one is active."""

    GO_NAME = "ContractGetPaymentQuoteRequest"
    unique_id: str = go_field("unique_id", STRING, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class ContractGetPaymentQuoteResponse(GoStruct):
    """Amounts and the rate as decimal text; ``expires_at`` always written (a ``time.Time``
    is a struct to ``omitempty``)."""

    GO_NAME = "ContractGetPaymentQuoteResponse"
    quote_id: str = go_field("quote_id", STRING, omitempty=True, default="")
    original_amount: str = go_field("original_amount", STRING, omitempty=True, default="")
    converted_amount: str = go_field("converted_amount", STRING, omitempty=True, default="")
    pricing_currency: str = go_field("pricing_currency", STRING, omitempty=True, default="")
    payment_currency: str = go_field("payment_currency", STRING, omitempty=True, default="")
    exchange_rate: str = go_field("exchange_rate", STRING, omitempty=True, default="")
    expires_at: str = go_field("expires_at", GO_TIME, omitempty=True, default=ZERO_TIME)
    error: str = go_field("error", STRING, omitempty=True, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class ContractValidatePaymentQuoteRequest(GoStruct):
    GO_NAME = "ContractValidatePaymentQuoteRequest"
    quote_id: str = go_field("quote_id", STRING, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class ContractValidatePaymentQuoteResponse(GoStruct):
    """``valid`` with the quote's details, or not, with ``error`` (``quote not found: …``,
    ``quote already used: …``, ``quote expired: …`` after ``quote validation failed: ``)."""

    GO_NAME = "ContractValidatePaymentQuoteResponse"
    valid: bool = go_field("valid", BOOL, default=False)
    quote_id: str = go_field("quote_id", STRING, omitempty=True, default="")
    original_amount: str = go_field("original_amount", STRING, omitempty=True, default="")
    converted_amount: str = go_field("converted_amount", STRING, omitempty=True, default="")
    pricing_currency: str = go_field("pricing_currency", STRING, omitempty=True, default="")
    payment_currency: str = go_field("payment_currency", STRING, omitempty=True, default="")
    exchange_rate: str = go_field("exchange_rate", STRING, omitempty=True, default="")
    expires_at: str = go_field("expires_at", GO_TIME, omitempty=True, default=ZERO_TIME)
    error: str = go_field("error", STRING, omitempty=True, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class ContractCancelPaymentQuoteRequest(GoStruct):
    GO_NAME = "ContractCancelPaymentQuoteRequest"
    quote_id: str = go_field("quote_id", STRING, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class ContractCancelPaymentQuoteResponse(GoStruct):
    """``{}`` once cancelled; ``error`` for an unknown or already used quote."""

    GO_NAME = "ContractCancelPaymentQuoteResponse"
    error: str = go_field("error", STRING, omitempty=True, default="")
