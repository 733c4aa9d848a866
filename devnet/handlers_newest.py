"""The newest DMS's behaviors beyond the node and its deployments: what a devnet node does
with a revocation broadcast, a subnet request and the tokenomics family.

``/dms/cap/revoke/broadcast`` is served for real: every node that hears it anchors the
revocation tokens (``AddRoots`` of ``dms/node/behaviors_cap.go``) and answers as the DMS does.
The devnet has no subnet subsystem and no contracts: a subnet request and a contract request
are answered in the DMS's own reply shape with an error saying so, never a success; the
listings (incoming contracts, transactions) are answered truthfully empty, and the payment
quotes as a DMS without transactions answers them: no transaction to quote, no quote to
validate or cancel, in the words of ``dms/node/behaviors_contract.go`` and
``tokenomics/store/payment_quote/store.go`` (the missing transaction's words follow the
transaction store's ``transaction not found with unique_id``). ``/dms/debug/
flightrec`` is not served: a devnet node runs no Go flight recorder, and a DMS without one
leaves the request unanswered, as an unserved behavior is.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from ..behaviors.cap_anchors import CapAnchorResponse, CapTokenAnchorRequest
from ..behaviors.subnet import SubnetCreateResponse, SubnetDestroyResponse, SubnetJoinResponse
from ..behaviors.tokenomics import (
    CollectUsagesAndForwardToPaymentProvidersReponse,
    ContractApproveLocalResponse,
    ContractCancelPaymentQuoteRequest,
    ContractCancelPaymentQuoteResponse,
    ContractCompletionResponse,
    ContractConfirmLocalTransactionResponse,
    ContractGetPaymentQuoteRequest,
    ContractGetPaymentQuoteResponse,
    ContractListIncomingResponse,
    ContractListLocalTransactionsResponse,
    ContractPaymentStatusResponse,
    ContractSettleResponse,
    ContractStatusResponse,
    ContractTerminationResponse,
    ContractValidatePaymentQuoteRequest,
    ContractValidatePaymentQuoteResponse,
    ContractValidateResponse,
    CreateContractResponse,
)
from ..errors import DmsgwError
from ..gojson import GoStruct
from ..transport.envelope import Envelope
from .simulated_node import DmsNode

NO_SUBNETS = "subnets are not supported by the devnet: its allocations share the host's network"
NO_TOKENOMICS = "tokenomics is not supported by the devnet: it holds no contracts"

_UNSUPPORTED: dict[str, tuple[type[GoStruct], str]] = {
    "/dms/node/subnet/create": (SubnetCreateResponse, NO_SUBNETS),
    "/dms/node/subnet/destroy": (SubnetDestroyResponse, NO_SUBNETS),
    "/dms/node/subnet/join": (SubnetJoinResponse, NO_SUBNETS),
    "/dms/tokenomics/contract/create": (CreateContractResponse, NO_TOKENOMICS),
    "/dms/tokenomics/contract/state": (ContractStatusResponse, NO_TOKENOMICS),
    "/dms/tokenomics/contract/approve_local": (ContractApproveLocalResponse, NO_TOKENOMICS),
    "/dms/tokenomics/contract/terminate": (ContractTerminationResponse, NO_TOKENOMICS),
    "/dms/tokenomics/contract/complete": (ContractCompletionResponse, NO_TOKENOMICS),
    "/dms/tokenomics/contract/settle": (ContractSettleResponse, NO_TOKENOMICS),
    "/dms/tokenomics/contract/validate": (ContractValidateResponse, NO_TOKENOMICS),
    "/dms/tokenomics/contract/payment/status": (ContractPaymentStatusResponse, NO_TOKENOMICS),
    "/dms/tokenomics/contract/usages/calculate": (
        CollectUsagesAndForwardToPaymentProvidersReponse,
        NO_TOKENOMICS,
    ),
    "/dms/tokenomics/contract/transactions/confirm": (
        ContractConfirmLocalTransactionResponse,
        NO_TOKENOMICS,
    ),
}
"""Behaviors a devnet node has no subsystem for: their reply type and the error it carries."""

_EMPTY: dict[str, GoStruct] = {
    "/dms/tokenomics/contract/list_incoming": ContractListIncomingResponse(contracts=[]),
    "/dms/tokenomics/contract/transactions/list": ContractListLocalTransactionsResponse(
        transactions=[]
    ),
}
"""Listings of what a devnet node never holds: truthfully empty."""


def install_newest_behaviors(node: DmsNode) -> None:
    """The revocation broadcast, and the subnet and tokenomics answers."""

    async def revoke_broadcast(msg: Envelope, request: CapTokenAnchorRequest) -> CapAnchorResponse:
        try:
            node.capabilities.add_roots(revoke=request.token)
        except DmsgwError as exc:
            return CapAnchorResponse(error=str(exc))
        return CapAnchorResponse(ok=True)

    node.add_behavior("/dms/cap/revoke/broadcast", revoke_broadcast)
    for name, (reply, error) in _UNSUPPORTED.items():
        node.add_behavior(name, _answer(reply(error=error)))  # type: ignore[call-arg]
    for name, empty in _EMPTY.items():
        node.add_behavior(name, _answer(empty))
    node.add_behavior("/dms/tokenomics/contract/payment/quote/get", _no_transaction_to_quote)
    node.add_behavior("/dms/tokenomics/contract/payment/quote/validate", _no_quote_to_validate)
    node.add_behavior("/dms/tokenomics/contract/payment/quote/cancel", _no_quote_to_cancel)


async def _no_transaction_to_quote(
    msg: Envelope, request: ContractGetPaymentQuoteRequest
) -> ContractGetPaymentQuoteResponse:
    return ContractGetPaymentQuoteResponse(
        error="failed to get transaction: transaction not found with unique_id: "
        + request.unique_id
    )


async def _no_quote_to_validate(
    msg: Envelope, request: ContractValidatePaymentQuoteRequest
) -> ContractValidatePaymentQuoteResponse:
    return ContractValidatePaymentQuoteResponse(
        error=f"quote validation failed: {_no_quote(request.quote_id)}"
    )


async def _no_quote_to_cancel(
    msg: Envelope, request: ContractCancelPaymentQuoteRequest
) -> ContractCancelPaymentQuoteResponse:
    return ContractCancelPaymentQuoteResponse(
        error=f"quote not found: {_no_quote(request.quote_id)}"
    )


def _no_quote(quote_id: str) -> str:
    """The quote store's words for a quote it does not hold."""
    return f"quote not found: {quote_id}"


def _answer(reply: GoStruct) -> Callable[[Envelope, Any], Awaitable[GoStruct]]:
    """A handler that always gives ``reply``."""

    async def handler(msg: Envelope, request: Any) -> GoStruct:
        return reply

    return handler
