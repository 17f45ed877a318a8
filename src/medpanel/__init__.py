"""medpanel: a panel of AI and human clinicians deliberating on a patient case."""

__version__ = "0.1.0"
