"""Reading a /metrics page in the tests."""
from prometheus_client.parser import text_string_to_metric_families


def sample(text: str, name: str, **labels) -> float:
    """The value of the sample `name` with exactly these labels in a Prometheus exposition; 0 when absent."""
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and s.labels == labels:
                return s.value
    return 0.0
