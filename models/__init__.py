"""Plain Keras 3 model builders. No training code: ``toolkit.fit`` trains them.

Example:
    >>> from models import digits_mlp
    >>> model = digits_mlp(seed=0)
"""
from models.classifiers import digits_cnn, digits_mlp, mnist_cnn
from models.ctr import ctr
from models.recommender import recommender, synthetic_interactions

__all__ = ["ctr", "digits_cnn", "digits_mlp", "mnist_cnn", "recommender", "synthetic_interactions"]
