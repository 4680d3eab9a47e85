"""Limit/offset pages with bounds, and their shape in the OpenAPI document.

The views paginate by hand (APIView), so drf-spectacular cannot see the envelope by itself:
`page_of` names it ({count, next, previous, results}) and `PAGE_PARAMETERS` the query parameters.
A `limit` or `offset` that is not a small non-negative integer is a 400 naming the parameter,
not a database error.
"""

from __future__ import annotations

from functools import cache

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import LimitOffsetPagination

MAX_LIMIT = 1000
MAX_OFFSET = 10**9


class BoundedPagination(LimitOffsetPagination):
    max_limit = MAX_LIMIT

    def _number(self, request, name: str, maximum: int) -> int | None:
        raw = request.query_params.get(name)
        if raw is None or raw == "":
            return None
        if not raw.isdigit() or len(raw) > 12 or int(raw) > maximum:
            raise ValidationError(
                {name: [f"Must be a whole number from 0 to {maximum}, got {raw[:32]!r}."]}
            )
        return int(raw)

    def get_limit(self, request):
        limit = self._number(request, self.limit_query_param, MAX_LIMIT)
        return self.default_limit if not limit else limit

    def get_offset(self, request):
        return self._number(request, self.offset_query_param, MAX_OFFSET) or 0


PAGE_PARAMETERS = [
    OpenApiParameter(
        "limit", OpenApiTypes.INT, description=f"page size (at most {MAX_LIMIT})", required=False
    ),
    OpenApiParameter("offset", OpenApiTypes.INT, description="items to skip", required=False),
]


@cache
def page_of(serializer_class: type[serializers.Serializer]) -> type[serializers.Serializer]:
    """The page envelope around `serializer_class` items, for the schema."""
    name = serializer_class.__name__.removesuffix("Output")
    return type(
        f"Paginated{name}List",
        (serializers.Serializer,),
        {
            "count": serializers.IntegerField(),
            "next": serializers.URLField(allow_null=True),
            "previous": serializers.URLField(allow_null=True),
            "results": serializer_class(many=True),
            "__module__": __name__,
        },
    )
