"""Cases: the input of every protocol, and one loader per dataset format."""

from medpanel.cases.model import Case, Reference, Slide, Turn
from medpanel.cases.loaders import data_dir, load_case, load_dataset, dataset_names

__all__ = ["Case", "Reference", "Slide", "Turn", "data_dir", "load_case", "load_dataset", "dataset_names"]
