"""Metric functions against scipy and hand-computed values, including the degenerate cases."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from bertctl.data.glue import TASKS
from bertctl.data.tabular import TabularTask
from bertctl.errors import BertctlError, UsageError
from bertctl.metrics import (
    _ranks,
    accuracy,
    compute_metrics,
    compute_task_metrics,
    f1,
    matthews_correlation,
    pearson,
    spearman,
)


def test_accuracy_and_f1_by_hand():
    predictions = [1, 1, 1, 0, 0, 0, 1]
    labels = [1, 1, 0, 1, 0, 0, 0]
    assert accuracy(predictions, labels) == pytest.approx(4 / 7)
    assert f1(predictions, labels) == pytest.approx(2 * 2 / (2 * 2 + 2 + 1))  # tp=2, fp=2, fn=1
    assert f1(predictions, labels, positive=0) == pytest.approx(2 * 2 / (2 * 2 + 1 + 2))
    assert f1([0, 0], [0, 0]) == 0.0  # no positives anywhere: sklearn's zero_division default
    assert f1([1, 1], [1, 1]) == 1.0


def test_matthews_binary_by_hand_and_as_the_phi_coefficient():
    # tp=3, tn=2, fp=1, fn=1: (3*2 - 1*1) / sqrt(4 * 4 * 3 * 3) = 5/12
    predictions = [1, 1, 1, 1, 0, 0, 0]
    labels = [1, 1, 1, 0, 0, 0, 1]
    assert matthews_correlation(predictions, labels) == pytest.approx(5 / 12)
    rng = np.random.default_rng(0)
    for _ in range(5):
        p, g = rng.integers(0, 2, 50), rng.integers(0, 2, 50)
        assert matthews_correlation(p, g) == pytest.approx(stats.pearsonr(p, g).statistic)


def _multiclass_mcc(predictions: np.ndarray, labels: np.ndarray, k: int) -> float:
    """Gorodkin's definition: covariance of the one-hot matrices over the product of their spreads."""
    x, y = np.eye(k)[predictions], np.eye(k)[labels]
    x, y = x - x.mean(0), y - y.mean(0)
    return float((x * y).sum() / np.sqrt((x * x).sum() * (y * y).sum()))


def test_matthews_multiclass_against_the_definition():
    rng = np.random.default_rng(1)
    for _ in range(5):
        p, g = rng.integers(0, 3, 60), rng.integers(0, 3, 60)
        assert matthews_correlation(p, g) == pytest.approx(_multiclass_mcc(p, g, 3))
    assert matthews_correlation([0, 1, 2, 2], [0, 1, 2, 2]) == pytest.approx(1.0)
    # a class only the labels have (the model never predicts it), and one only the predictions have
    assert matthews_correlation([0, 1, 0, 1], [0, 1, 2, 2]) == pytest.approx(_multiclass_mcc(np.array([0, 1, 0, 1]),
                                                                                             np.array([0, 1, 2, 2]), 3))
    assert matthews_correlation([2, 1, 0, 2], [0, 1, 0, 1]) == pytest.approx(_multiclass_mcc(np.array([2, 1, 0, 2]),
                                                                                             np.array([0, 1, 0, 1]), 3))
    assert matthews_correlation([5, 7, 7], [5, 7, 5]) == pytest.approx(_multiclass_mcc(np.array([0, 1, 1]),
                                                                                         np.array([0, 1, 0]), 2))


def test_matthews_is_zero_for_constant_predictions_or_labels():
    assert matthews_correlation([1, 1, 1, 1], [0, 1, 0, 1]) == 0.0
    assert matthews_correlation([0, 1, 0, 1], [1, 1, 1, 1]) == 0.0
    assert matthews_correlation([1, 0, 1, 0], [0, 1, 0, 1]) == pytest.approx(-1.0)


def test_ranks_and_correlations_match_scipy_with_ties():
    rng = np.random.default_rng(2)
    for size in (2, 7, 100):
        x = np.round(rng.normal(size=size), 1)  # rounding makes ties
        y = np.round(x + rng.normal(scale=0.7, size=size), 1)
        assert np.array_equal(_ranks(x), stats.rankdata(x))
        if np.ptp(x) and np.ptp(y):
            assert pearson(x, y) == pytest.approx(stats.pearsonr(x, y).statistic, abs=1e-12)
            assert spearman(x, y) == pytest.approx(stats.spearmanr(x, y).statistic, abs=1e-12)
    assert pearson([1, 2, 3], [2, 4, 6]) == pytest.approx(1.0)
    assert spearman([1, 2, 3], [1, 8, 27]) == pytest.approx(1.0)
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)


def test_correlations_of_a_constant_are_zero_not_nan():
    assert pearson([0.1, 0.1, 0.1], [1.0, 2.0, 3.0]) == 0.0
    assert spearman([1.0, 2.0, 3.0], [4.0, 4.0, 4.0]) == 0.0


def test_a_nan_prediction_makes_every_metric_nan_as_scipy_does():
    """Ranks placed the NaNs somewhere: all-NaN predictions had a Spearman of 1.0, one NaN in four 0.2."""
    nan = float("nan")
    for predictions, labels in (([nan] * 5, [0.1, 0.2, 0.3, 0.4, 0.5]), ([1.0, nan, 3.0, 2.0], [1.0, 2.0, 3.0, 4.0]),
                                ([1.0, 2.0, 3.0, 4.0], [1.0, nan, 3.0, 2.0])):
        assert np.isnan(stats.spearmanr(predictions, labels).statistic)
        assert np.isnan(spearman(predictions, labels)) and np.isnan(pearson(predictions, labels))
    for metric in (accuracy, f1, matthews_correlation):  # class ids are NaN where the logits were
        assert np.isnan(metric([1, nan, 0], [1, 0, 0]))
    assert np.isnan(compute_task_metrics("mrpc", [nan, 1], [0, 1])["f1"])


def test_bad_inputs_raise_one_line_errors():
    with pytest.raises(BertctlError, match="3 predictions for 2 labels"):
        accuracy([0, 1, 1], [0, 1])
    with pytest.raises(BertctlError, match="no examples"):
        pearson([], [])
    with pytest.raises(BertctlError, match=r"one prediction per example.*\(2, 2\)"):
        accuracy([[0.1, 0.9], [0.8, 0.2]], [1, 0])  # logits, not class ids
    with pytest.raises(BertctlError, match=r"one prediction per example.*\(2,\) and \(2, 2\)"):
        accuracy([1, 0], [[0, 1], [1, 0]])  # one-hot labels
    with pytest.raises(BertctlError, match="unknown metric"):
        compute_metrics(["bleu"], [0], [0])


def test_each_task_reports_its_metrics_with_its_main_one():
    expected = {"cola": ["matthews_correlation"], "sst2": ["accuracy"], "mrpc": ["f1", "accuracy"],
                "stsb": ["pearson", "spearman"], "qqp": ["f1", "accuracy"], "mnli": ["accuracy"],
                "qnli": ["accuracy"], "rte": ["accuracy"], "wnli": ["accuracy"], "ax": ["matthews_correlation"]}
    for name, task in TASKS.items():
        predictions, labels = ([0.5, 2.0, 4.5], [1.0, 2.5, 4.0]) if task.is_regression else ([1, 0, 1], [1, 1, 1])
        scores = compute_task_metrics(name, predictions, labels)
        assert list(scores) == expected[name] and task.main_metric in scores
    assert {name: task.main_metric for name, task in TASKS.items()} == {  # the BERT paper's Table 1 choice
        "cola": "matthews_correlation", "sst2": "accuracy", "mrpc": "f1", "stsb": "spearman", "qqp": "f1",
        "mnli": "accuracy", "qnli": "accuracy", "rte": "accuracy", "wnli": "accuracy", "ax": "matthews_correlation"}
    assert compute_task_metrics("mrpc", [1, 0, 1, 1], [1, 0, 0, 1]) == {"f1": pytest.approx(0.8), "accuracy": 0.75}
    with pytest.raises(UsageError, match="unknown GLUE task"):
        compute_task_metrics("squad", [0], [0])


def test_user_tables_are_scored_through_the_same_call():
    from bertctl.data.tabular import classify_task

    tasks = (classify_task(("a", "b")), classify_task("abc"), classify_task(()))
    assert [(t.metrics, t.main_metric) for t in tasks] == [
        (("accuracy", "f1", "matthews_correlation"), "accuracy"), (("accuracy", "matthews_correlation"), "accuracy"),
        (("pearson", "spearman"), "spearman")]
    task = TabularTask(("neg", "pos"), ("accuracy", "f1", "matthews_correlation"), "accuracy", None, None)
    scores = compute_task_metrics(task, [1, 0, 1, 1], [1, 0, 0, 1])
    assert scores == {"accuracy": 0.75, "f1": pytest.approx(0.8),
                      "matthews_correlation": pytest.approx(2 / np.sqrt(12))}  # tp=2 tn=1 fp=1 fn=0


@pytest.mark.filterwarnings("ignore::scipy.stats.NearConstantInputWarning")  # its reference values are right
def test_pearson_is_scipys_at_any_scale_and_for_two_points():
    """The dot products of the deviations under- or overflowed (values ~1e-200 or ~1e200: r of ±1.0 or 0.0 for
    a true 0.35), and two points a float's last bit apart had r 0.71: the mean's rounding left the deviations
    lopsided. scipy scales the deviations by their largest first, and two distinct points are ±1."""
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=20), rng.normal(size=20)
    expected = stats.pearsonr(x, y).statistic
    for scale_x, scale_y in ((1e-200, 1e150), (1e200, 1.0), (1e-170, 1e-170)):
        assert pearson(x * scale_x, y * scale_y) == pytest.approx(expected, abs=1e-12)
    for pair in (([2.5000000000000004, 2.5], [-0.3, -0.5]), ([1e-300, 0.0], [5.0, 4.0])):
        assert pearson(*pair) == stats.pearsonr(*pair).statistic == 1.0
    assert pearson([2.5, 2.5000000000000004], [-0.3, -0.5]) == -1.0


def test_pearson_of_points_on_a_line_is_one_not_a_rounding_past_it():
    """Three points on a line: the dot products rounded r to ±1.0000000000000002; scipy clips it to [-1, 1]."""
    x, y = [0.732, -1.171, -1.434], [0.7130520751723783, 0.5227520751723783, 0.4964520751723783]
    assert pearson(x, y) == stats.pearsonr(x, y).statistic == 1.0
    falling = [-value for value in y]  # the same rounding on the other side: clipped to -1.0, not below
    assert pearson(x, falling) == stats.pearsonr(x, falling).statistic == -1.0
