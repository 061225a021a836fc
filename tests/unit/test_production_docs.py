"""docs/production.md grants exactly the Kinesis and DynamoDB actions the package calls.

The calls are found in the package's source, not listed by hand: every attribute named after an
operation of botocore's ``kinesis``, ``dynamodb`` or ``sts`` service model
(``client.get_records(...)``, and ``client.put_item`` passed on without a call), every
``getattr(client, "<operation>")``, and the operations behind ``get_paginator("<operation>")`` and
``get_waiter("<waiter>")``. Each maps to its IAM action; the documented policy must grant all of
them (the pipeline works) and no other Kinesis or DynamoDB action (it stays least privilege).
"""

from __future__ import annotations

import ast
import functools
import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore import xform_name
from botocore.exceptions import UnknownServiceError
from botocore.session import get_session

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGE = REPO_ROOT / "airflow_provider_kinesis_doris"
DOC = REPO_ROOT / "docs" / "production.md"
SERVICES = ("kinesis", "dynamodb", "sts")
LEAST_PRIVILEGE_SERVICES = ("kinesis", "dynamodb")
"""The policy grants no action of these the code does not call. STS is checked one way only: the
executors' role session may be assumed by botocore itself, where no call of ours shows it."""

NOT_AWS = {
    ("core/doris/http.py", "location"): "location.query: a urlsplit() result's query string, not DynamoDB's",
}
"""Attributes named like an operation whose object is not an AWS client: (file, object) → why."""

TRANSACTION_ITEM_ACTIONS = {
    "Put": "dynamodb:PutItem",
    "Update": "dynamodb:UpdateItem",
    "Delete": "dynamodb:DeleteItem",
    "ConditionCheck": "dynamodb:ConditionCheckItem",
}
"""TransactWriteItems has no IAM action of its own: each item is authorised by the action of its kind."""

NO_IAM_ACTION_OF_THEIR_OWN = {"dynamodb:TransactWriteItems", "dynamodb:TransactGetItems"}
OTHER_ACTIONS = {"kms:Decrypt", "sts:AssumeRole"}
"""The only actions the policy may grant besides Kinesis and DynamoDB ones (kms:Decrypt is used
by Kinesis on the reader's behalf, so no call of ours shows it)."""
RESOURCES = {
    "kinesis": ("arn:aws:kinesis:<region>:<account>:stream/<stream>",
                # DescribeStreamConsumer and SubscribeToShard act on the consumer, not the stream.
                "arn:aws:kinesis:<region>:<account>:stream/<stream>/consumer/<consumer-name>:*"),
    "dynamodb": "arn:aws:dynamodb:<region>:<account>:table/<checkpoint-table>",
    "kms": "arn:aws:kms:<region>:<account>:key/<key-id>",
    "sts": "arn:aws:iam::<account>:role/<executor-role>",
}
"""The only resource each service's statements may name (the doc's placeholders)."""


# --- what the documented policy grants ---------------------------------------------------------


def policy_documents(text: str) -> list[dict[str, Any]]:
    """The IAM policy documents in ``text``'s ``json`` code blocks."""
    documents = [json.loads(block) for block in re.findall(r"```json\n(.*?)```", text, re.S)]
    return [document for document in documents if isinstance(document, dict) and "Statement" in document]


def statements(documents: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for document in documents:
        found = document["Statement"]
        yield from [found] if isinstance(found, dict) else found


def as_list(value: str | list[str]) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def granted_actions(documents: Iterable[dict[str, Any]]) -> set[str]:
    return {action for statement in statements(documents) for action in as_list(statement["Action"])}


# --- what the package calls --------------------------------------------------------------------


@functools.cache
def operations() -> dict[str, dict[str, str]]:
    """Per service, snake_case method name → operation name (``get_records`` → ``GetRecords``)."""
    session = get_session()
    return {
        service: {xform_name(name): name for name in session.get_service_model(service).operation_names}
        for service in SERVICES
    }


@functools.cache
def waiters() -> dict[str, dict[str, str]]:
    """Per service, snake_case waiter name → the operation it polls (``table_exists`` → ``DescribeTable``)."""
    session = get_session()
    found: dict[str, dict[str, str]] = {}
    for service in SERVICES:
        try:
            model = session.get_waiter_model(service)
        except UnknownServiceError:  # botocore has no waiters for it (sts)
            found[service] = {}
            continue
        found[service] = {xform_name(name): model.get_waiter(name).operation for name in model.waiter_names}
    return found


def _services_of(name: str, table: dict[str, dict[str, str]]) -> list[tuple[str, str]]:
    return [(service, table[service][name]) for service in SERVICES if name in table[service]]


def package_sources() -> Iterator[tuple[str, ast.Module]]:
    # testing/ (stand-ins and test builders) never runs in a task, so what it calls is no action
    # a deployment's policy must grant.
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.relative_to(PACKAGE).parts[0] == "testing":
            continue
        yield path.relative_to(PACKAGE).as_posix(), ast.parse(path.read_text(), filename=str(path))


def _constant_argument(call: ast.Call, index: int) -> str | None:
    argument = call.args[index] if len(call.args) > index else None
    return argument.value if isinstance(argument, ast.Constant) and isinstance(argument.value, str) else None


def references(sources: Iterable[tuple[str, ast.Module]]) -> Iterator[tuple[str, str, str, str]]:
    """(where, service, operation, object) for every reference to an operation of ``SERVICES``."""
    for relative, tree in sources:
        for node in ast.walk(tree):
            where = f"{relative}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, ast.Attribute):
                for service, operation in _services_of(node.attr, operations()):
                    yield where, service, operation, ast.unparse(node.value)
            elif isinstance(node, ast.Call) and isinstance(node.func, (ast.Attribute, ast.Name)):
                function = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
                if function == "getattr" and (name := _constant_argument(node, 1)):
                    for service, operation in _services_of(name, operations()):
                        yield where, service, operation, ast.unparse(node.args[0])
                elif function == "get_paginator" and (name := _constant_argument(node, 0)):
                    for service, operation in _services_of(name, operations()):
                        yield where, service, operation, ast.unparse(node.func)
                elif function == "get_waiter" and (name := _constant_argument(node, 0)):
                    for service, operation in _services_of(name, waiters()):
                        yield where, service, operation, ast.unparse(node.func)


def transaction_item_kinds(tree: ast.Module) -> set[str]:
    """The kinds of the items a module puts into transactions: the first element of its
    ``("Put", request)`` tuples, or the key of its ``{"Update": request}`` dicts."""
    candidates: list[ast.expr | None] = []
    for node in ast.walk(tree):
        candidates += [node.elts[0]] if isinstance(node, ast.Tuple) and node.elts else []
        candidates += node.keys if isinstance(node, ast.Dict) else []
    return {c.value for c in candidates if isinstance(c, ast.Constant) and c.value in TRANSACTION_ITEM_ACTIONS}


def required_actions(sources: list[tuple[str, ast.Module]]) -> dict[str, list[str]]:
    """IAM action → where the package calls it.

    :raises AssertionError: an operation name belongs to several services, or the kinds of a
        transaction's items cannot be told (the action then cannot be decided).
    """
    trees = dict(sources)
    found: dict[str, list[str]] = {}
    ambiguous = []
    by_place: dict[tuple[str, str, str], set[str]] = {}
    for where, service, operation, holder in references(sources):
        if (where.rpartition(":")[0], holder) in NOT_AWS:
            continue
        by_place.setdefault((where, operation, holder), set()).add(service)
    for (where, operation, holder), services in by_place.items():
        if len(services) > 1:
            ambiguous.append(f"{where}: {holder}.{operation} is an operation of {' and '.join(sorted(services))}")
            continue
        (service,) = services
        action = f"{service}:{operation}"
        if action == "dynamodb:TransactWriteItems":
            kinds = transaction_item_kinds(trees[where.rpartition(":")[0]])
            assert kinds, f"{where}: TransactWriteItems of items whose kinds (Put, Update, ...) are not visible"
            for kind in sorted(kinds):
                where_item = f"{where} (TransactWriteItems {kind})"
                found.setdefault(TRANSACTION_ITEM_ACTIONS[kind], []).append(where_item)
        elif action in NO_IAM_ACTION_OF_THEIR_OWN:
            raise AssertionError(f"{where}: {action} needs the actions of its items; teach this test which")
        else:
            found.setdefault(action, []).append(where)
    assert not ambiguous, "Operations of several services; tell this test which client each is:\n" + "\n".join(
        ambiguous
    )
    return found


def policy_gaps(granted: set[str], required: dict[str, list[str]]) -> tuple[dict[str, list[str]], set[str]]:
    """(actions the code calls that the policy lacks, with where; Kinesis/DynamoDB actions the
    policy grants that the code never calls)."""
    missing = {action: where for action, where in required.items() if action not in granted}
    checked = {action for action in granted if action.partition(":")[0] in LEAST_PRIVILEGE_SERVICES}
    extra = checked - set(required)
    return missing, extra


@pytest.fixture(scope="module")
def documents() -> list[dict[str, Any]]:
    found = policy_documents(DOC.read_text())
    assert found, f"{DOC} has no IAM policy in a ```json block"
    return found


@pytest.fixture(scope="module")
def required() -> dict[str, list[str]]:
    return required_actions(list(package_sources()))


# --- tests -------------------------------------------------------------------------------------


def test_the_policy_grants_every_action_the_package_calls_and_no_other(
    documents: list[dict[str, Any]], required: dict[str, list[str]]
) -> None:
    missing, extra = policy_gaps(granted_actions(documents), required)
    assert not missing, "docs/production.md's policy lacks actions the package calls:\n" + "\n".join(
        f"{action}: {', '.join(where)}" for action, where in sorted(missing.items())
    )
    assert not extra, f"docs/production.md's policy grants actions the package never calls: {sorted(extra)}"


def test_the_scan_finds_the_calls_it_is_meant_to_find(required: dict[str, list[str]]) -> None:
    # One of each kind of reference, so a scan that silently finds nothing cannot pass.
    assert any(where.startswith("core/kinesis/topology.py") for where in required["kinesis:ListShards"])  # a call
    assert any(where.startswith("core/stores/dynamodb.py") for where in required["dynamodb:PutItem"])  # passed on
    assert any("TransactWriteItems" in where for where in required["dynamodb:UpdateItem"])  # a transaction's items
    assert "dynamodb:DescribeTable" in required  # the table_exists waiter, besides describe_table


def test_the_scan_reads_every_way_of_reaching_an_operation() -> None:
    source = """
kinesis.describe_stream(StreamName="s")
send = self._client.delete_item
pages = kinesis.get_paginator("list_streams")
waiter = kinesis.get_waiter("stream_not_exists")
getattr(client, "scan")(TableName="t")
client.transact_write_items(TransactItems=[{"ConditionCheck": check}])
client.tag_resource(ResourceArn=arn)
"""
    with pytest.raises(AssertionError, match="client.TagResource is an operation of dynamodb and kinesis"):
        required_actions([("new.py", ast.parse(source))])
    found = required_actions([("new.py", ast.parse(source.replace("client.tag_resource(ResourceArn=arn)", "")))])
    assert set(found) == {
        "kinesis:DescribeStream", "kinesis:ListStreams", "dynamodb:DeleteItem", "dynamodb:Scan",
        "dynamodb:ConditionCheckItem",
    }  # fmt: skip


def test_every_exemption_still_names_something() -> None:
    sources = list(package_sources())
    seen = {(where.rpartition(":")[0], holder) for where, _, _, holder in references(sources)}
    assert set(NOT_AWS) <= seen, f"remove the exemptions that match nothing: {sorted(set(NOT_AWS) - seen)}"


@pytest.mark.parametrize("action", ["kinesis:GetRecords", "dynamodb:UpdateItem", "dynamodb:BatchWriteItem"])
def test_a_policy_without_one_of_the_actions_fails_the_check(
    documents: list[dict[str, Any]], required: dict[str, list[str]], action: str
) -> None:
    missing, _ = policy_gaps(granted_actions(documents) - {action}, required)
    assert set(missing) == {action}


def test_a_policy_with_an_uncalled_action_fails_the_check(
    documents: list[dict[str, Any]], required: dict[str, list[str]]
) -> None:
    _, extra = policy_gaps(granted_actions(documents) | {"kinesis:DeregisterStreamConsumer", "dynamodb:Scan"}, required)
    assert extra == {"kinesis:DeregisterStreamConsumer", "dynamodb:Scan"}


def test_the_policy_is_a_valid_least_privilege_document(documents: list[dict[str, Any]]) -> None:
    from moto.iam.policy_validation import IAMPolicyDocumentValidator

    (document,) = documents
    IAMPolicyDocumentValidator(json.dumps(document)).validate()
    assert document["Version"] == "2012-10-17"
    sids = [statement["Sid"] for statement in statements(documents)]
    assert len(sids) == len(set(sids)), "every statement has a Sid of its own (the doc's tables name them)"
    granted = granted_actions(documents)
    others = {action for action in granted if action.partition(":")[0] not in LEAST_PRIVILEGE_SERVICES}
    assert others == OTHER_ACTIONS
    for statement in statements(documents):
        assert statement["Effect"] == "Allow" and "NotAction" not in statement and "NotResource" not in statement
        prefixes = {action.partition(":")[0] for action in as_list(statement["Action"])}
        assert len(prefixes) == 1, f"{statement['Sid']}: one service a statement"
        assert all("*" not in action for action in as_list(statement["Action"])), statement["Sid"]
        (prefix,) = prefixes
        for resource in as_list(statement["Resource"]):
            expected = RESOURCES[prefix]
            assert resource in (expected if isinstance(expected, tuple) else (expected,)), f"{statement['Sid']}: {resource}"


def test_the_doc_names_every_statement(documents: list[dict[str, Any]]) -> None:
    text = DOC.read_text()
    for statement in statements(documents):
        assert f"`{statement['Sid']}`" in text, f"the doc's tables do not say who needs {statement['Sid']}"
